#!/usr/bin/env python3
"""Generate the bundled sample dataset ``data/sample_nq.jsonl``.

The dataset imitates the shape of Natural Questions (lowercase questions
without a question mark, short answers) but every question and passage was
written for this project.  Each item carries ten "retrieved" documents in a
ranked order: one or two relevant passages that contain an answer string,
one or two hard negatives on the same topic that do not, and filler
passages borrowed from other items' topics.

The generator is deterministic (stdlib only, ``random.Random(13)``) and
verifies that every document's ``relevant`` flag agrees with the
answer-occurrence rule: a document is relevant iff some normalised answer
string occurs in its normalised text (normalise = lowercase, remove
punctuation, fold whitespace).  Any violation aborts with an error.

Usage:  python3 scripts/make_sample_dataset.py [--out PATH]
"""

import argparse
import json
import os
import random
import re
import sys
import unicodedata

SEED = 13
DOCS_PER_ITEM = 10
MIN_WORDS, MAX_WORDS = 20, 70
MAX_SENTENCES = 3

# Each fact: question, answers, relevant passages [(title, text)], hard
# negatives [(title, text)] on the same topic that must not contain any answer.
FACTS = [
    {
        "q": "who wrote the novel pride and prejudice",
        "a": ["Jane Austen", "Austen"],
        "rel": [
            ("Pride and Prejudice", "Pride and Prejudice is a novel of manners by Jane Austen, first published in 1813. It follows Elizabeth Bennet as she navigates questions of class, marriage and first impressions in rural England."),
            ("Jane Austen", "Jane Austen was an English novelist born in 1775 in Steventon, Hampshire. Her best-known works include Sense and Sensibility, Pride and Prejudice and Emma, which examine the dependence of women on marriage."),
        ],
        "neg": [
            ("Elizabeth Bennet", "Elizabeth Bennet is the protagonist of the 1813 novel Pride and Prejudice. She is the second of five daughters of a country gentleman and is known for her wit and her quick judgements of others."),
        ],
    },
    {
        "q": "when did the first man land on the moon",
        "a": ["1969", "July 20, 1969", "20 July 1969"],
        "rel": [
            ("Apollo 11", "Apollo 11 was the American spaceflight that first landed humans on the Moon. Commander Neil Armstrong and pilot Buzz Aldrin touched down in the lunar module Eagle on July 20, 1969, while Michael Collins remained in orbit."),
        ],
        "neg": [
            ("Apollo program", "The Apollo program was run by NASA and used the Saturn V rocket to send crews toward the Moon. Six of its missions achieved crewed landings before the program ended in the early 1970s."),
        ],
    },
    {
        "q": "what is the capital city of australia",
        "a": ["Canberra"],
        "rel": [
            ("Canberra", "Canberra is the capital city of Australia. Located in the Australian Capital Territory, it was chosen as a compromise between Sydney and Melbourne and was built as a planned city in the early twentieth century."),
        ],
        "neg": [
            ("Sydney", "Sydney is the most populous city in Australia and the capital of the state of New South Wales. It is known for its harbour, the Sydney Opera House and the Sydney Harbour Bridge."),
        ],
    },
    {
        "q": "who painted the mona lisa",
        "a": ["Leonardo da Vinci", "Leonardo"],
        "rel": [
            ("Mona Lisa", "The Mona Lisa is a half-length portrait painted by the Italian artist Leonardo da Vinci in the early sixteenth century. It is displayed at the Louvre in Paris and is among the most visited artworks in the world."),
            ("Leonardo da Vinci", "Leonardo da Vinci was an Italian polymath of the High Renaissance who worked as a painter, engineer and scientist. His most famous paintings include the Mona Lisa and The Last Supper."),
        ],
        "neg": [
            ("Louvre", "The Louvre is the world's most-visited art museum, housed in a former royal palace on the Right Bank of the Seine in Paris. Its glass pyramid entrance was completed in 1989."),
        ],
    },
    {
        "q": "what is the hardest natural mineral",
        "a": ["diamond"],
        "rel": [
            ("Diamond", "Diamond is a solid form of carbon with its atoms arranged in a crystal lattice. It is the hardest naturally occurring mineral and scores 10, the top value, on the Mohs scale of hardness."),
        ],
        "neg": [
            ("Mohs scale", "The Mohs scale ranks minerals by their resistance to scratching on a scale from 1 to 10. Talc is the softest mineral on the scale, while corundum, the mineral form of ruby and sapphire, sits at 9."),
        ],
    },
    {
        "q": "who developed the theory of general relativity",
        "a": ["Albert Einstein", "Einstein"],
        "rel": [
            ("General relativity", "General relativity is the geometric theory of gravitation published by Albert Einstein in 1915. It describes gravity not as a force but as the curvature of spacetime caused by mass and energy."),
        ],
        "neg": [
            ("Gravitational wave", "Gravitational waves are ripples in spacetime produced by accelerating masses. They were first detected directly in 2015 by the LIGO observatories, which recorded the merger of two black holes."),
        ],
    },
    {
        "q": "how many bones are in the adult human body",
        "a": ["206"],
        "rel": [
            ("Human skeleton", "The skeleton of an adult human typically consists of 206 bones, although the count at birth is higher because several bones fuse together during childhood. The skeleton supports the body and protects the internal organs."),
        ],
        "neg": [
            ("Femur", "The femur, or thigh bone, is the longest and strongest bone in the human body. It connects the hip to the knee and bears much of the body's weight when a person is standing."),
        ],
    },
    {
        "q": "who was the first president of the united states",
        "a": ["George Washington", "Washington"],
        "rel": [
            ("George Washington", "George Washington was an American military officer and statesman who served as the first president of the United States from 1789 to 1797. He had earlier commanded the Continental Army during the Revolutionary War."),
            ("President of the United States", "The office of President of the United States was created by the Constitution drafted in 1787. George Washington was the first person to hold it, taking the oath of office in New York City in 1789."),
        ],
        "neg": [
            ("John Adams", "John Adams was a Founding Father who served as the second president of the United States. Before that he was vice president for two terms and had represented the new nation as a diplomat in Europe."),
        ],
    },
    {
        "q": "what is the largest ocean on earth",
        "a": ["Pacific Ocean", "Pacific"],
        "rel": [
            ("Pacific Ocean", "The Pacific Ocean is the largest and deepest of Earth's oceanic divisions. It stretches from the Arctic in the north to the Southern Ocean in the south and contains the Mariana Trench."),
        ],
        "neg": [
            ("Atlantic Ocean", "The Atlantic Ocean is the second-largest of the world's oceans. It separates the Americas from Europe and Africa and is divided lengthwise by the Mid-Atlantic Ridge, an underwater mountain range."),
        ],
    },
    {
        "q": "who won the fifa world cup in 2018",
        "a": ["France"],
        "rel": [
            ("2018 FIFA World Cup", "The 2018 FIFA World Cup was held in Russia. France won the tournament by defeating Croatia 4–2 in the final at the Luzhniki Stadium in Moscow on 15 July 2018."),
        ],
        "neg": [
            ("Croatia national football team", "The Croatia national football team reached its first World Cup final in 2018 after knockout wins over Denmark, Russia and England. Its captain Luka Modrić was named the best player of the tournament."),
        ],
    },
    {
        "q": "what is the longest river in africa",
        "a": ["Nile", "Nile River", "River Nile"],
        "rel": [
            ("Nile", "The Nile is a major north-flowing river in northeastern Africa and is generally regarded as the longest river on the continent. It passes through Sudan and Egypt before draining into the Mediterranean Sea."),
        ],
        "neg": [
            ("Congo River", "The Congo River is the second-longest river in Africa and the deepest river in the world, with measured depths of more than 220 metres. Its course crosses the equator twice."),
        ],
    },
    {
        "q": "who composed the four seasons",
        "a": ["Antonio Vivaldi", "Vivaldi"],
        "rel": [
            ("The Four Seasons (Vivaldi)", "The Four Seasons is a group of four violin concertos composed by Antonio Vivaldi and published in 1725. Each concerto depicts a season of the year, from spring birdsong to winter storms."),
        ],
        "neg": [
            ("Baroque music", "Baroque music is a style of Western classical music composed roughly from 1600 to 1750. Its leading composers include Johann Sebastian Bach and George Frideric Handel, and the period saw the rise of the concerto and opera."),
        ],
    },
    {
        "q": "what is the tallest mountain in the world",
        "a": ["Mount Everest", "Everest"],
        "rel": [
            ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, rising to about 8,849 metres on the border between Nepal and China. It was first climbed in 1953 by Edmund Hillary and Tenzing Norgay."),
            ("Tenzing Norgay", "Tenzing Norgay was a Nepali-Indian Sherpa mountaineer. Together with the New Zealander Edmund Hillary, he made the first confirmed ascent of Mount Everest on 29 May 1953."),
        ],
        "neg": [
            ("K2", "K2 is the second-highest mountain on Earth and lies in the Karakoram range on the border between Pakistan and China. It is regarded as one of the most difficult and dangerous peaks to climb."),
        ],
    },
    {
        "q": "in which year did the titanic sink",
        "a": ["1912"],
        "rel": [
            ("Titanic", "RMS Titanic was a British passenger liner that sank in the North Atlantic Ocean on 15 April 1912 after striking an iceberg during her maiden voyage from Southampton to New York City."),
        ],
        "neg": [
            ("Harland and Wolff", "Harland and Wolff is a shipbuilding company based in Belfast, Northern Ireland. Its shipyard constructed many of the large ocean liners operated by the White Star Line in the early twentieth century."),
        ],
    },
    {
        "q": "who discovered penicillin",
        "a": ["Alexander Fleming", "Fleming"],
        "rel": [
            ("Penicillin", "Penicillin was discovered in 1928 by the Scottish scientist Alexander Fleming, who noticed that a mould contaminating one of his culture plates had killed the surrounding bacteria. It became the first widely used antibiotic."),
        ],
        "neg": [
            ("Antibiotic", "An antibiotic is a substance that kills bacteria or slows their growth. Overuse of antibiotics has contributed to antimicrobial resistance, which the World Health Organization regards as a major threat to global health."),
        ],
    },
    {
        "q": "what is the capital of canada",
        "a": ["Ottawa"],
        "rel": [
            ("Ottawa", "Ottawa is the capital city of Canada. It stands on the south bank of the Ottawa River in the province of Ontario and is home to Parliament Hill and many national museums."),
        ],
        "neg": [
            ("Toronto", "Toronto is the capital of the province of Ontario and the most populous city in Canada. It lies on the northwestern shore of Lake Ontario and is the country's main financial centre."),
        ],
    },
    {
        "q": "who wrote romeo and juliet",
        "a": ["William Shakespeare", "Shakespeare"],
        "rel": [
            ("Romeo and Juliet", "Romeo and Juliet is a tragedy written by William Shakespeare early in his career about two young lovers from feuding families in Verona. It was among his most popular plays during his lifetime."),
            ("William Shakespeare", "William Shakespeare was an English playwright and poet born in Stratford-upon-Avon in 1564. His works include the tragedies Hamlet, Macbeth, Othello and Romeo and Juliet."),
        ],
        "neg": [
            ("Globe Theatre", "The Globe Theatre was a playhouse in London built in 1599 by the acting company known as the Lord Chamberlain's Men. A modern reconstruction opened near the original site on the south bank of the Thames in 1997."),
        ],
    },
    {
        "q": "which planet is known as the red planet",
        "a": ["Mars"],
        "rel": [
            ("Mars", "Mars is the fourth planet from the Sun. It is often called the Red Planet because iron oxide, better known as rust, on its surface gives it a reddish appearance in the night sky."),
        ],
        "neg": [
            ("Jupiter", "Jupiter is the fifth planet from the Sun and the largest in the Solar System. It is a gas giant famous for its Great Red Spot, a giant storm that is larger than Earth."),
        ],
    },
    {
        "q": "what is the largest planet in the solar system",
        "a": ["Jupiter"],
        "rel": [
            ("Jupiter", "Jupiter is the largest planet in the Solar System, with a mass more than twice that of all the other planets combined. It is composed mainly of hydrogen and helium."),
        ],
        "neg": [
            ("Saturn", "Saturn is the sixth planet from the Sun and the second-largest in the Solar System. It is best known for its prominent ring system, which is made mostly of particles of ice and rock."),
        ],
    },
    {
        "q": "who invented the world wide web",
        "a": ["Tim Berners-Lee", "Berners-Lee"],
        "rel": [
            ("World Wide Web", "The World Wide Web was invented by the English computer scientist Tim Berners-Lee while he was working at CERN in 1989. The first website went online in 1991."),
        ],
        "neg": [
            ("Internet", "The Internet is a global system of interconnected computer networks that communicate using the TCP/IP protocol suite. Its origins trace back to ARPANET, a research network funded by the United States Department of Defense in the late 1960s."),
        ],
    },
    {
        "q": "when did the berlin wall fall",
        "a": ["1989", "November 9, 1989", "9 November 1989"],
        "rel": [
            ("Berlin Wall", "The Berlin Wall divided East and West Berlin from 1961. On 9 November 1989, East German authorities announced that citizens could cross the border freely, and crowds soon began dismantling the wall."),
        ],
        "neg": [
            ("German reunification", "German reunification was the process by which the German Democratic Republic joined the Federal Republic of Germany. It was formally completed on 3 October 1990, a date now celebrated as German Unity Day."),
        ],
    },
    {
        "q": "who was the first woman to win a nobel prize",
        "a": ["Marie Curie", "Curie"],
        "rel": [
            ("Marie Curie", "Marie Curie was a Polish-born physicist and chemist who became the first woman to win a Nobel Prize, sharing the 1903 prize in physics. She later won the 1911 prize in chemistry for discovering polonium and radium."),
        ],
        "neg": [
            ("Radium", "Radium is a highly radioactive chemical element with atomic number 88. It glows faintly in the dark and was once used in luminous paint for watch dials before its health dangers were understood."),
        ],
    },
    {
        "q": "what is the capital of japan",
        "a": ["Tokyo"],
        "rel": [
            ("Tokyo", "Tokyo, formerly known as Edo, is the capital of Japan. Its greater metropolitan area is the most populous in the world, and the city hosted the Summer Olympic Games in 1964 and again in 2021."),
        ],
        "neg": [
            ("Kyoto", "Kyoto is a city on the island of Honshu that served as the seat of Japan's imperial court for more than a thousand years. It is famous for its Buddhist temples, gardens and wooden townhouses."),
        ],
    },
    {
        "q": "how many players does a basketball team have on the court",
        "a": ["five", "5"],
        "rel": [
            ("Basketball", "Basketball is a team sport in which two teams, each with five players on the court, try to score points by shooting a ball through a hoop mounted ten feet above the floor."),
        ],
        "neg": [
            ("National Basketball Association", "The National Basketball Association is a professional basketball league in North America made up of thirty teams. Its regular season is followed by playoffs that end with the NBA Finals."),
        ],
    },
    {
        "q": "who painted the starry night",
        "a": ["Vincent van Gogh", "van Gogh"],
        "rel": [
            ("The Starry Night", "The Starry Night is an oil painting by the Dutch post-impressionist Vincent van Gogh, made in June 1889. It depicts a swirling night sky over a village and was inspired by the view from his room at an asylum in Saint-Rémy-de-Provence."),
        ],
        "neg": [
            ("Museum of Modern Art", "The Museum of Modern Art is an art museum in Midtown Manhattan, New York City. Founded in 1929, it holds a collection that includes works by Picasso, Matisse and Warhol."),
        ],
    },
    {
        "q": "what gas do plants absorb from the air for photosynthesis",
        "a": ["carbon dioxide", "CO2"],
        "rel": [
            ("Photosynthesis", "Photosynthesis is the process by which plants, algae and some bacteria use light energy to convert water and carbon dioxide into glucose. Oxygen is released as a by-product of the reaction."),
        ],
        "neg": [
            ("Chlorophyll", "Chlorophyll is the green pigment found in the chloroplasts of plants and algae. It absorbs mostly blue and red light and reflects green light, which is why leaves appear green to the human eye."),
        ],
    },
    {
        "q": "who was the first person to reach the south pole",
        "a": ["Roald Amundsen", "Amundsen"],
        "rel": [
            ("Roald Amundsen", "Roald Amundsen was a Norwegian explorer who led the first expedition to reach the South Pole, arriving on 14 December 1911. His team beat the British party led by Robert Falcon Scott by about five weeks."),
        ],
        "neg": [
            ("Terra Nova Expedition", "The Terra Nova Expedition was a British Antarctic expedition led by Robert Falcon Scott. Scott and four companions reached the pole in January 1912 but died on the return journey."),
        ],
    },
    {
        "q": "what is the smallest country in the world",
        "a": ["Vatican City", "Vatican"],
        "rel": [
            ("Vatican City", "Vatican City is an independent city-state enclaved within Rome, Italy. Covering less than half a square kilometre, it is the smallest country in the world by both area and population."),
        ],
        "neg": [
            ("Monaco", "Monaco is a sovereign city-state on the French Riviera bordering France. It is the second-smallest country in the world and is known for its casino and its Formula One Grand Prix."),
        ],
    },
    {
        "q": "who wrote on the origin of species",
        "a": ["Charles Darwin", "Darwin"],
        "rel": [
            ("On the Origin of Species", "On the Origin of Species is a work of scientific literature by Charles Darwin, published in 1859. It introduced the theory that populations evolve over the course of generations through a process of natural selection."),
        ],
        "neg": [
            ("HMS Beagle", "HMS Beagle was a Royal Navy sloop that carried out a survey voyage around the world between 1831 and 1836. Observations made on the Galápagos Islands during the voyage later shaped ideas about evolution."),
        ],
    },
    {
        "q": "what is the currency of the united kingdom",
        "a": ["pound sterling", "pound"],
        "rel": [
            ("Pound sterling", "The pound sterling is the official currency of the United Kingdom and several of its territories. It is the oldest currency still in continuous use and is divided into 100 pence."),
        ],
        "neg": [
            ("Bank of England", "The Bank of England is the central bank of the United Kingdom, founded in 1694. It sets the official interest rate and issues banknotes in England and Wales."),
        ],
    },
    {
        "q": "who was the first emperor of rome",
        "a": ["Augustus"],
        "rel": [
            ("Augustus", "Augustus was the first Roman emperor, ruling from 27 BC until his death in AD 14. Born Gaius Octavius, he was the adopted heir of Julius Caesar and founded the system of rule known as the Principate."),
        ],
        "neg": [
            ("Julius Caesar", "Julius Caesar was a Roman general and statesman who played a critical role in the fall of the Roman Republic. He was assassinated by a group of senators on the Ides of March in 44 BC."),
        ],
    },
    {
        "q": "what is the boiling point of water in celsius",
        "a": ["100 degrees Celsius", "100"],
        "rel": [
            ("Boiling point", "At standard atmospheric pressure, pure water boils at 100 degrees Celsius, or 212 degrees Fahrenheit. The boiling point falls at higher altitudes, where the surrounding air pressure is lower."),
        ],
        "neg": [
            ("Melting point", "The melting point of a substance is the temperature at which it changes from a solid to a liquid. Pure ice melts at zero degrees Celsius under standard atmospheric pressure."),
        ],
    },
    {
        "q": "who was the lead singer of queen",
        "a": ["Freddie Mercury", "Mercury"],
        "rel": [
            ("Freddie Mercury", "Freddie Mercury was a British singer and songwriter who achieved fame as the lead vocalist of the rock band Queen. He wrote hits such as Bohemian Rhapsody and was known for his wide vocal range."),
        ],
        "neg": [
            ("Brian May", "Brian May is an English musician best known as the lead guitarist of the rock band Queen. He also holds a doctorate in astrophysics from Imperial College London."),
        ],
    },
    {
        "q": "what is the largest hot desert in the world",
        "a": ["Sahara", "Sahara Desert"],
        "rel": [
            ("Sahara", "The Sahara is a desert spanning much of North Africa. Covering about nine million square kilometres, it is the largest hot desert in the world, exceeded in size only by the cold deserts of Antarctica and the Arctic."),
        ],
        "neg": [
            ("Gobi Desert", "The Gobi Desert is a large cold desert and grassland region in northern China and southern Mongolia. It is known for its dinosaur fossils and for sharp swings in temperature between the seasons."),
        ],
    },
    {
        "q": "who was the first person to walk on the moon",
        "a": ["Neil Armstrong", "Armstrong"],
        "rel": [
            ("Neil Armstrong", "Neil Armstrong was an American astronaut and aeronautical engineer. As commander of the Apollo 11 mission, he became the first person to walk on the Moon on July 20, 1969."),
        ],
        "neg": [
            ("Buzz Aldrin", "Buzz Aldrin is an American former astronaut who piloted the lunar module Eagle. He was the second person to step onto the lunar surface, following his mission commander by about twenty minutes."),
        ],
    },
    {
        "q": "which element has the atomic number 1",
        "a": ["hydrogen"],
        "rel": [
            ("Hydrogen", "Hydrogen is the chemical element with atomic number 1 and the symbol H. It is the lightest element and the most abundant in the universe, making up roughly three quarters of all normal matter by mass."),
        ],
        "neg": [
            ("Helium", "Helium is a colourless, odourless noble gas and the second element of the periodic table. It has the lowest boiling point of any element and is used to cool superconducting magnets."),
        ],
    },
    {
        "q": "who wrote one hundred years of solitude",
        "a": ["Gabriel García Márquez", "García Márquez", "Gabriel Garcia Marquez"],
        "rel": [
            ("One Hundred Years of Solitude", "One Hundred Years of Solitude is a 1967 novel by the Colombian author Gabriel García Márquez. It tells the multi-generational story of the Buendía family in the fictional town of Macondo."),
        ],
        "neg": [
            ("Magical realism", "Magical realism is a literary style that presents fantastical events within an otherwise realistic setting. It is closely associated with Latin American writers of the twentieth century, including Jorge Luis Borges and Isabel Allende."),
        ],
    },
    {
        "q": "what is the capital of egypt",
        "a": ["Cairo"],
        "rel": [
            ("Cairo", "Cairo is the capital and largest city of Egypt. It lies on the Nile just south of the river's delta, and its metropolitan area extends to the Giza pyramid complex on the western edge."),
        ],
        "neg": [
            ("Alexandria", "Alexandria is the second-largest city in Egypt and a major port on the Mediterranean coast. It was founded by Alexander the Great and was home to a famous ancient library and lighthouse."),
        ],
    },
    {
        "q": "who formulated the law of universal gravitation",
        "a": ["Isaac Newton", "Newton"],
        "rel": [
            ("Newton's law of universal gravitation", "The law of universal gravitation was formulated by Isaac Newton and published in his Principia in 1687. It states that every mass attracts every other mass with a force proportional to the product of their masses."),
        ],
        "neg": [
            ("Johannes Kepler", "Johannes Kepler was a German astronomer best known for his three laws of planetary motion. He showed that the planets move in elliptical orbits with the Sun at one focus."),
        ],
    },
    {
        "q": "in which city is the eiffel tower located",
        "a": ["Paris"],
        "rel": [
            ("Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris. It was designed and built by the engineering company of Gustave Eiffel and completed in 1889 for a world's fair."),
        ],
        "neg": [
            ("Gustave Eiffel", "Gustave Eiffel was a French civil engineer whose company built bridges and railway viaducts across Europe. He also designed the internal iron framework of the Statue of Liberty."),
        ],
    },
    {
        "q": "what is the speed of light in a vacuum",
        "a": ["299,792,458 metres per second", "299792458"],
        "rel": [
            ("Speed of light", "The speed of light in a vacuum is exactly 299,792,458 metres per second. Since 1983 this value has been fixed by definition, and the metre itself is defined in terms of it."),
        ],
        "neg": [
            ("Light-year", "A light-year is the distance that light travels in a vacuum in one Julian year. It is used to express astronomical distances and equals roughly 9.46 trillion kilometres."),
        ],
    },
    {
        "q": "who won the first super bowl",
        "a": ["Green Bay Packers", "Packers"],
        "rel": [
            ("Super Bowl I", "Super Bowl I was played on January 15, 1967, at the Los Angeles Memorial Coliseum. The Green Bay Packers of the NFL defeated the Kansas City Chiefs of the AFL by a score of 35–10."),
        ],
        "neg": [
            ("Vince Lombardi Trophy", "The Vince Lombardi Trophy is awarded each year to the team that wins the National Football League's championship game. It is named after the coach who led his team to victory in the first two Super Bowls."),
        ],
    },
    {
        "q": "what is the largest country in the world by area",
        "a": ["Russia"],
        "rel": [
            ("Russia", "Russia is the largest country in the world by area, covering more than 17 million square kilometres across Eastern Europe and Northern Asia. Its territory spans eleven time zones."),
        ],
        "neg": [
            ("Canada", "Canada is the second-largest country in the world by total area. It stretches from the Atlantic to the Pacific and northward into the Arctic Ocean, and shares the longest international border with the United States."),
        ],
    },
    {
        "q": "who painted the ceiling of the sistine chapel",
        "a": ["Michelangelo"],
        "rel": [
            ("Sistine Chapel ceiling", "The Sistine Chapel ceiling was painted by Michelangelo between 1508 and 1512 at the commission of Pope Julius II. Its central panels depict scenes from the Book of Genesis, including the Creation of Adam."),
        ],
        "neg": [
            ("Sistine Chapel", "The Sistine Chapel is a chapel in the Apostolic Palace in Vatican City. It is the site of the papal conclave, the process by which the cardinals choose a new pope."),
        ],
    },
    {
        "q": "when did world war ii end",
        "a": ["1945"],
        "rel": [
            ("World War II", "World War II was a global conflict that lasted from 1939 to 1945. The war in Europe ended in May 1945, and Japan formally surrendered on 2 September 1945."),
            ("Surrender of Japan", "The surrender of Imperial Japan was announced by Emperor Hirohito on 15 August 1945 and formally signed aboard the battleship USS Missouri in Tokyo Bay on 2 September 1945."),
        ],
        "neg": [
            ("Treaty of Versailles", "The Treaty of Versailles was signed in June 1919 and ended the state of war between Germany and the Allied Powers after World War I. It imposed reparations and territorial losses on Germany."),
        ],
    },
    {
        "q": "who wrote the harry potter books",
        "a": ["J. K. Rowling", "J.K. Rowling", "Rowling"],
        "rel": [
            ("Harry Potter", "Harry Potter is a series of seven fantasy novels written by the British author J. K. Rowling. The books follow a young wizard and his friends at Hogwarts School of Witchcraft and Wizardry."),
            ("J. K. Rowling", "J. K. Rowling is a British author best known for writing the Harry Potter fantasy series. The first book, Harry Potter and the Philosopher's Stone, was published in 1997."),
        ],
        "neg": [
            ("Hogwarts", "Hogwarts is a fictional boarding school of magic for students aged eleven to eighteen. It is housed in a castle in the Scottish Highlands and divided into four houses, including Gryffindor and Slytherin."),
        ],
    },
    {
        "q": "what is the largest organ of the human body",
        "a": ["skin"],
        "rel": [
            ("Skin", "Skin is the layer of soft tissue covering the outside of the body, and it is the body's largest organ. It protects against pathogens, helps regulate temperature and allows the sensation of touch."),
        ],
        "neg": [
            ("Liver", "The liver is the largest internal organ in the human body. It processes nutrients absorbed from the digestive tract, produces bile and removes toxins from the blood."),
        ],
    },
    {
        "q": "who was the first woman to fly solo across the atlantic",
        "a": ["Amelia Earhart", "Earhart"],
        "rel": [
            ("Amelia Earhart", "Amelia Earhart was an American aviation pioneer. In May 1932 she became the first woman to fly solo nonstop across the Atlantic Ocean, landing in a pasture in Northern Ireland."),
        ],
        "neg": [
            ("Charles Lindbergh", "Charles Lindbergh was an American aviator who made the first solo nonstop transatlantic flight in 1927. He flew the Spirit of St. Louis from New York to Paris in about thirty-three and a half hours."),
        ],
    },
    {
        "q": "what is the capital of brazil",
        "a": ["Brasília", "Brasilia"],
        "rel": [
            ("Brasília", "Brasília is the federal capital of Brazil. The planned city was inaugurated in 1960, replacing Rio de Janeiro as the seat of government, and is known for its modernist buildings designed by Oscar Niemeyer."),
        ],
        "neg": [
            ("Rio de Janeiro", "Rio de Janeiro is the second-most populous city in Brazil. It is known for its Carnival celebrations, Copacabana beach and the statue of Christ the Redeemer overlooking the city."),
        ],
    },
    {
        "q": "who is considered the father of the computer",
        "a": ["Charles Babbage", "Babbage"],
        "rel": [
            ("Charles Babbage", "Charles Babbage was an English mathematician and engineer who is often called the father of the computer. In the 1830s he designed the Analytical Engine, a mechanical general-purpose computer."),
        ],
        "neg": [
            ("Ada Lovelace", "Ada Lovelace was an English mathematician who wrote what is often regarded as the first published computer program. Her notes described how a mechanical engine could calculate Bernoulli numbers."),
        ],
    },
    {
        "q": "where were the first modern olympic games held",
        "a": ["Athens"],
        "rel": [
            ("1896 Summer Olympics", "The 1896 Summer Olympics were the first international Olympic Games of the modern era. They were held in Athens, Greece, in April 1896, with athletes from fourteen nations taking part."),
            ("Panathenaic Stadium", "The Panathenaic Stadium in Athens is one of the few stadiums in the world built entirely of marble. It hosted the opening ceremony and several events of the first modern Olympic Games in 1896."),
        ],
        "neg": [
            ("Pierre de Coubertin", "Pierre de Coubertin was a French educator and historian who founded the International Olympic Committee in 1894. He later served as its president and designed the Olympic rings emblem."),
        ],
    },
    {
        "q": "what is the main language spoken in brazil",
        "a": ["Portuguese"],
        "rel": [
            ("Languages of Brazil", "Portuguese is the official and most widely spoken language of Brazil, used by nearly the entire population. Brazil is the largest Portuguese-speaking country in the world."),
        ],
        "neg": [
            ("Spanish language", "Spanish is a Romance language that originated in the Iberian Peninsula. It is the official language of most countries in South and Central America and has hundreds of millions of native speakers."),
        ],
    },
    {
        "q": "who directed the film jurassic park",
        "a": ["Steven Spielberg", "Spielberg"],
        "rel": [
            ("Jurassic Park (film)", "Jurassic Park is a 1993 science fiction film directed by Steven Spielberg and based on the novel by Michael Crichton. Its computer-generated dinosaurs marked a milestone in visual effects."),
        ],
        "neg": [
            ("Michael Crichton", "Michael Crichton was an American author and filmmaker known for techno-thrillers such as The Andromeda Strain and Sphere. He also created the hospital drama series ER."),
        ],
    },
    {
        "q": "what is the freezing point of water in fahrenheit",
        "a": ["32 degrees Fahrenheit", "32"],
        "rel": [
            ("Fahrenheit", "On the Fahrenheit scale, water freezes at 32 degrees Fahrenheit and boils at 212 degrees at standard atmospheric pressure. The scale is named after the physicist Daniel Gabriel Fahrenheit."),
        ],
        "neg": [
            ("Celsius", "The Celsius scale is a temperature scale named after the Swedish astronomer Anders Celsius. It is used in most countries around the world for everyday temperature measurement."),
        ],
    },
    {
        "q": "who was the first female prime minister of the united kingdom",
        "a": ["Margaret Thatcher", "Thatcher"],
        "rel": [
            ("Margaret Thatcher", "Margaret Thatcher was a British stateswoman who served as Prime Minister of the United Kingdom from 1979 to 1990. She was the first woman to hold the office and led the Conservative Party."),
        ],
        "neg": [
            ("10 Downing Street", "10 Downing Street is the official residence and office of the Prime Minister of the United Kingdom. The building in Westminster, London, has housed prime ministers since the eighteenth century."),
        ],
    },
    {
        "q": "what is the longest river in south america",
        "a": ["Amazon", "Amazon River"],
        "rel": [
            ("Amazon River", "The Amazon River in South America is the largest river in the world by discharge volume and the longest river on the continent. It flows east across Brazil to the Atlantic Ocean."),
        ],
        "neg": [
            ("Orinoco", "The Orinoco is one of the longest rivers in South America, flowing through Venezuela and Colombia. Its delta on the Atlantic coast is home to extensive wetlands and mangrove forests."),
        ],
    },
    {
        "q": "who was the principal author of the declaration of independence",
        "a": ["Thomas Jefferson", "Jefferson"],
        "rel": [
            ("United States Declaration of Independence", "The Declaration of Independence was adopted by the Second Continental Congress on July 4, 1776. Its principal author was Thomas Jefferson, who drafted it on behalf of a committee of five."),
        ],
        "neg": [
            ("Independence Hall", "Independence Hall is a historic building in Philadelphia where the Second Continental Congress met during the American Revolution. The United States Constitution was also debated and signed there in 1787."),
        ],
    },
    {
        "q": "what is the capital of south korea",
        "a": ["Seoul"],
        "rel": [
            ("Seoul", "Seoul is the capital and largest city of South Korea. Located on the Han River, it hosted the 1988 Summer Olympics and was one of the host cities of the 2002 FIFA World Cup."),
        ],
        "neg": [
            ("Busan", "Busan is the second-most populous city in South Korea and its largest port. It sits on the southeastern tip of the Korean Peninsula and hosts an annual international film festival."),
        ],
    },
    {
        "q": "which programming language was created by guido van rossum",
        "a": ["Python"],
        "rel": [
            ("Python (programming language)", "Python is a high-level programming language created by Guido van Rossum and first released in 1991. Its design emphasises code readability through the use of significant indentation."),
        ],
        "neg": [
            ("Java (programming language)", "Java is a class-based, object-oriented programming language developed at Sun Microsystems and released in 1995. Programs are compiled to bytecode that runs on the Java virtual machine."),
        ],
    },
    {
        "q": "who founded microsoft with paul allen",
        "a": ["Bill Gates", "Gates"],
        "rel": [
            ("Microsoft", "Microsoft is an American technology company founded in 1975 by Bill Gates and Paul Allen in Albuquerque, New Mexico. It is best known for the Windows operating system and the Office software suite."),
        ],
        "neg": [
            ("Microsoft Windows", "Microsoft Windows is a family of graphical operating systems. Its first version appeared in 1985, and later releases such as Windows 95 and Windows XP became dominant on personal computers."),
        ],
    },
    {
        "q": "what is the smallest planet in the solar system",
        "a": ["Mercury"],
        "rel": [
            ("Mercury (planet)", "Mercury is the smallest planet in the Solar System and the closest to the Sun. It completes an orbit every 88 days and has almost no atmosphere to retain heat."),
        ],
        "neg": [
            ("Venus", "Venus is the second planet from the Sun and the hottest in the Solar System because of its thick carbon dioxide atmosphere. It is often visible as a bright point of light shortly after sunset."),
        ],
    },
    {
        "q": "who was the first person to travel into space",
        "a": ["Yuri Gagarin", "Gagarin"],
        "rel": [
            ("Yuri Gagarin", "Yuri Gagarin was a Soviet pilot and cosmonaut who became the first human to journey into outer space. His Vostok 1 capsule completed one orbit of Earth on 12 April 1961."),
            ("Vostok 1", "Vostok 1 was the first spaceflight to carry a human into orbit. Launched from the Baikonur Cosmodrome, it carried the cosmonaut Yuri Gagarin around the Earth in about 108 minutes."),
        ],
        "neg": [
            ("Valentina Tereshkova", "Valentina Tereshkova is a former Soviet cosmonaut who in June 1963 became the first woman to fly in space. She orbited Earth 48 times aboard the Vostok 6 spacecraft."),
        ],
    },
    {
        "q": "in which country is machu picchu located",
        "a": ["Peru"],
        "rel": [
            ("Machu Picchu", "Machu Picchu is a fifteenth-century Inca citadel on a mountain ridge in the Andes of southern Peru. It was declared a UNESCO World Heritage Site in 1983."),
        ],
        "neg": [
            ("Inca Empire", "The Inca Empire was the largest empire in pre-Columbian America, with its administrative centre in Cusco. It was conquered by Spanish forces led by Francisco Pizarro in the sixteenth century."),
        ],
    },
    {
        "q": "in which sport is the stanley cup awarded",
        "a": ["ice hockey", "hockey"],
        "rel": [
            ("Stanley Cup", "The Stanley Cup is the championship trophy awarded each year to the playoff winner of the National Hockey League. It is the oldest existing trophy awarded to a professional sports franchise in North America."),
        ],
        "neg": [
            ("Frederick Stanley, 16th Earl of Derby", "Frederick Stanley, 16th Earl of Derby, served as Governor General of Canada from 1888 to 1893. In 1892 he donated a silver challenge bowl that later became one of the most famous trophies in sport."),
        ],
    },
    {
        "q": "which country has won the most fifa world cups",
        "a": ["Brazil"],
        "rel": [
            ("Brazil national football team", "The Brazil national football team has won the FIFA World Cup a record five times, in 1958, 1962, 1970, 1994 and 2002. It is the only team to have played in every edition of the tournament."),
        ],
        "neg": [
            ("FIFA World Cup", "The FIFA World Cup is an international football competition held every four years. The first tournament took place in Uruguay in 1930, and the host nation won the final."),
        ],
    },
    {
        "q": "who composed the symphony that ends with ode to joy",
        "a": ["Ludwig van Beethoven", "Beethoven"],
        "rel": [
            ("Symphony No. 9 (Beethoven)", "The Symphony No. 9 in D minor is the final complete symphony by Ludwig van Beethoven, first performed in Vienna in 1824. Its last movement sets Friedrich Schiller's poem Ode to Joy for soloists and chorus."),
        ],
        "neg": [
            ("Ode to Joy", "Ode to Joy is a poem written by Friedrich Schiller in 1785. A famous musical setting of the poem was later adopted as the anthem of the Council of Europe and of the European Union."),
        ],
    },
    {
        "q": "what is the highest waterfall in the world",
        "a": ["Angel Falls"],
        "rel": [
            ("Angel Falls", "Angel Falls in Venezuela is the world's tallest uninterrupted waterfall, with a height of 979 metres. It plunges over the edge of the Auyán-tepui mountain in Canaima National Park."),
        ],
        "neg": [
            ("Niagara Falls", "Niagara Falls is a group of three waterfalls on the border between Canada and the United States. It is famous for its high flow rate rather than its height and is a major tourist destination."),
        ],
    },
]

# Rank weights for the first relevant document (rank 1 .. 10): mostly near
# the top, as a reasonable retriever would place it, but spread out.
REL_RANK_WEIGHTS = [30, 18, 13, 10, 8, 6, 5, 4, 3, 3]

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _strip_punct(text, repl):
    return "".join(repl if unicodedata.category(ch).startswith("P") else ch for ch in text)


def _fold(text):
    return " ".join(text.split())


def normalise(text):
    """Canonical rule: lowercase, remove punctuation, fold whitespace."""
    return _fold(_strip_punct(text.lower(), ""))


# Variants used only to make the check robust to common evaluator choices
# (punctuation -> space; SQuAD-style article removal).
NORMALISERS = (
    normalise,
    lambda t: _fold(_strip_punct(t.lower(), " ")),
    lambda t: _fold(_ARTICLES.sub(" ", normalise(t))),
)


def contains_answer(text, answers, norm=normalise):
    """Plain substring rule: some normalised answer occurs in normalised text."""
    nt = norm(text)
    return any(norm(a) and norm(a) in nt for a in answers)


def contains_answer_token(text, answers, norm):
    """Stricter rule: the answer occurs on token boundaries."""
    nt = " " + norm(text) + " "
    return any(norm(a) and (" " + norm(a) + " ") in nt for a in answers)


def fail(msg):
    sys.exit("make_sample_dataset: CHECK FAILED: " + msg)


def check_passage(title, text, where):
    words = len(text.split())
    if not MIN_WORDS <= words <= MAX_WORDS:
        fail(f"{where} {title!r} has {words} words (want {MIN_WORDS}-{MAX_WORDS})")
    # Sentence ends: terminal punctuation not part of an initial ("J. K.")
    # or a common abbreviation ("St.", "No.").
    masked = re.sub(r"\b(?:[A-Z]|St|No|Dr|Mr|Mrs)\.", "_", text)
    sentences = len(re.findall(r"[.!?](?:\s|$)", masked))
    if not 1 <= sentences <= MAX_SENTENCES:
        fail(f"{where} {title!r} has {sentences} sentences")


def check_fact(fact, where):
    q = fact["q"]
    if q != q.lower() or "?" in q or q != q.strip():
        fail(f"{where} question not NQ style: {q!r}")
    if not 1 <= len(fact["a"]) <= 3:
        fail(f"{where} needs 1-3 answers")
    if not 1 <= len(fact["rel"]) <= 2 or not 1 <= len(fact["neg"]) <= 2:
        fail(f"{where} needs 1-2 relevant and 1-2 hard negative passages")
    for title, text in fact["rel"] + fact["neg"]:
        check_passage(title, text, where)


def is_clean_negative(title, text, answers):
    """No answer string in title or text under any normaliser (substring)."""
    return not any(
        contains_answer(title + " " + text, answers, norm) for norm in NORMALISERS
    )


def is_solid_positive(text, answers):
    return all(contains_answer_token(text, answers, norm) for norm in NORMALISERS)


def build(facts):
    rng = random.Random(SEED)
    pool = []  # (owner index, title, text) of every passage in the table
    for i, fact in enumerate(facts):
        for title, text in fact["rel"] + fact["neg"]:
            pool.append((i, title, text))

    rows = []
    for i, fact in enumerate(facts):
        item_id = f"nq-{i + 1:03d}"
        check_fact(fact, item_id)
        answers = fact["a"]
        for title, text in fact["rel"]:
            if not is_solid_positive(text, answers):
                fail(f"{item_id} relevant passage {title!r} lacks an answer string")
        for title, text in fact["neg"]:
            if not is_clean_negative(title, text, answers):
                fail(f"{item_id} hard negative {title!r} contains an answer string")

        slots = [None] * DOCS_PER_ITEM
        free = list(range(DOCS_PER_ITEM))

        # Relevant documents at varied ranks.
        for title, text in fact["rel"]:
            weights = [REL_RANK_WEIGHTS[s] for s in free]
            pos = rng.choices(free, weights=weights)[0]
            free.remove(pos)
            slots[pos] = (title, text, True)

        # Hard negatives rank high (they look on-topic to a retriever).
        for title, text in fact["neg"]:
            pos = rng.choice(free[:4])
            free.remove(pos)
            slots[pos] = (title, text, False)

        # Fill the rest with passages borrowed from other items' topics.
        used_titles = {s[0] for s in slots if s}
        used_texts = {s[1] for s in slots if s}
        candidates = [p for p in pool if p[0] != i]
        rng.shuffle(candidates)
        for _, title, text in candidates:
            if not free:
                break
            if title in used_titles or text in used_texts:
                continue
            if not is_clean_negative(title, text, answers):
                continue
            pos = free.pop(0)
            slots[pos] = (title, text, False)
            used_titles.add(title)
            used_texts.add(text)
        if free:
            fail(f"{item_id}: not enough filler passages")

        docs = []
        for rank, (title, text, relevant) in enumerate(slots, start=1):
            docs.append({
                "id": f"{item_id}-d{rank}",
                "title": title,
                "text": text,
                "relevant": relevant,
            })
        rows.append({
            "id": item_id,
            "question": fact["q"],
            "answers": list(answers),
            "documents": docs,
        })
    return rows


def verify(rows):
    """Independent re-check of the written rows against the answer rule."""
    if len(rows) < 55:
        fail(f"only {len(rows)} items")
    ids = set()
    for row in rows:
        if row["id"] in ids:
            fail(f"duplicate item id {row['id']}")
        ids.add(row["id"])
        docs = row["documents"]
        if len(docs) != DOCS_PER_ITEM:
            fail(f"{row['id']} has {len(docs)} documents")
        if len({d["id"] for d in docs}) != len(docs):
            fail(f"{row['id']} has duplicate document ids")
        n_rel = 0
        for d in docs:
            check_passage(d["title"], d["text"], row["id"])
            occurs = contains_answer(d["text"], row["answers"])
            if occurs != d["relevant"]:
                fail(f"{row['id']} {d['id']}: relevant={d['relevant']} but answer occurrence={occurs}")
            if d["relevant"] and not is_solid_positive(d["text"], row["answers"]):
                fail(f"{row['id']} {d['id']}: relevant doc fails a normaliser variant")
            if not d["relevant"] and not is_clean_negative(d["title"], d["text"], row["answers"]):
                fail(f"{row['id']} {d['id']}: non-relevant doc matches a normaliser variant")
            n_rel += d["relevant"]
        if not 1 <= n_rel <= 2:
            fail(f"{row['id']} has {n_rel} relevant documents")


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(os.path.dirname(here), "data", "sample_nq.jsonl")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=default_out, help="output path (default: %(default)s)")
    args = parser.parse_args(argv)

    rows = build(FACTS)
    verify(rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    two = sum(1 for r in rows if sum(d["relevant"] for d in r["documents"]) == 2)
    ranks = {}
    for r in rows:
        for k, d in enumerate(r["documents"], start=1):
            if d["relevant"]:
                ranks[k] = ranks.get(k, 0) + 1
    print(f"wrote {args.out}: {len(rows)} items, {two} with 2 relevant docs, {os.path.getsize(args.out)} bytes")
    print("relevant-doc rank distribution:", dict(sorted(ranks.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
